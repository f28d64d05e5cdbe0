package demodata

// The word lists below are the whole imagination of the generator; edit them freely.
// Output stays deterministic because lists are slices and maps are only looked up by
// key, never ranged over. Editing a list changes the catalog of every seed.

type menuKind int

const (
	noMenu menuKind = iota
	menuBBQ
	menuSouthern
	menuAmerican
	menuMexican
	menuItalian
	menuChicken
	menuSeafood
	menuCafe
	menuBakery
	menuBar
	menuBrewery
)

type hoursKind int

const (
	hoursRestaurant hoursKind = iota
	hoursCafe
	hoursBar
	hoursShop
	hoursOffice
	hoursDaylight
	hoursAlways
)

// venueKind says which events a place can host.
type venueKind int

const (
	notVenue venueKind = iota
	venueStage
	venueArts
	venueFood
	venueGrounds
)

type category struct {
	id      string
	weight  int
	cores   []string // the business word of a name: "Smokehouse", "Antique Mall"
	noun    string   // what it is, for descriptions
	known   []string // what it is known for
	menu    menuKind
	hours   hoursKind
	venue   venueKind
	gemless bool // errands, not destinations: never a hidden gem
}

var categories = []category{
	{"food.restaurant.bbq", 60, []string{"Smokehouse", "BBQ", "Bar-B-Q", "Pit Barbecue", "Smoke Shack", "Barbecue Co.", "Rib Shack", "Mutton House"}, "barbecue joint",
		[]string{"hickory-smoked pulled pork", "Owensboro-style mutton", "slow-smoked brisket", "dry-rub ribs", "burgoo by the quart"}, menuBBQ, hoursRestaurant, venueFood, false},
	{"food.restaurant.southern", 70, []string{"Kitchen", "Table", "Supper Club", "Country Kitchen", "Home Cooking", "Biscuit House", "Meat & Three", "Dinner Bell"}, "Southern restaurant",
		[]string{"the Hot Brown", "country ham biscuits", "fried chicken dinners", "chess pie", "fried green tomatoes"}, menuSouthern, hoursRestaurant, venueFood, false},
	{"food.restaurant.american", 70, []string{"Grill", "Diner", "Tavern & Grill", "Burger Bar", "Family Restaurant", "Eatery", "Bistro"}, "restaurant",
		[]string{"hand-pressed burgers", "beer cheese", "hearty breakfasts", "patty melts", "hand-cut fries"}, menuAmerican, hoursRestaurant, venueFood, false},
	{"food.restaurant.mexican", 35, []string{"Cantina", "Taqueria", "Mexican Grill", "Tacos", "Cocina"}, "Mexican restaurant",
		[]string{"street tacos", "house-made salsa", "sizzling fajitas", "tamales"}, menuMexican, hoursRestaurant, notVenue, false},
	{"food.restaurant.italian", 25, []string{"Trattoria", "Pasta House", "Italian Kitchen", "Ristorante"}, "Italian restaurant",
		[]string{"hand-made pasta", "lasagna", "wood-fired pizza", "tiramisu"}, menuItalian, hoursRestaurant, notVenue, false},
	{"food.restaurant.pizza", 35, []string{"Pizza", "Pizza Co.", "Pizzeria", "Slice House"}, "pizza place",
		[]string{"bourbon BBQ chicken pizza", "thin-crust pies", "garlic knots", "late-night slices"}, menuItalian, hoursRestaurant, notVenue, false},
	{"food.restaurant.chicken", 25, []string{"Hot Chicken", "Fried Chicken", "Chicken Shack", "Chicken & Biscuits"}, "fried chicken spot",
		[]string{"hot chicken sandwiches", "crispy tenders", "buttermilk biscuits"}, menuChicken, hoursRestaurant, notVenue, false},
	{"food.restaurant.seafood", 15, []string{"Catfish House", "Fish House", "Catfish Kitchen", "Fish Camp"}, "fish house",
		[]string{"fried catfish", "hushpuppies", "Kentucky Lake crappie", "fish sandwiches"}, menuSeafood, hoursRestaurant, notVenue, false},
	{"food.cafe", 45, []string{"Coffee House", "Coffee Co.", "Roasters", "Cafe", "Espresso Bar", "Coffee & Books"}, "coffee shop",
		[]string{"bourbon vanilla lattes", "locally roasted beans", "breakfast biscuits", "cinnamon rolls"}, menuCafe, hoursCafe, venueStage, false},
	{"food.bakery", 20, []string{"Bakery", "Bake Shop", "Donut Shop", "Pie Co."}, "bakery",
		[]string{"bourbon balls", "apple fritters", "chess pie", "sourdough"}, menuBakery, hoursCafe, notVenue, false},
	{"food.dessert", 15, []string{"Dairy Bar", "Creamery", "Ice Cream Parlor", "Sweet Shop"}, "ice cream stand",
		[]string{"soft-serve cones", "banana splits", "blackberry milkshakes"}, menuBakery, hoursCafe, notVenue, false},
	{"drink.bar.bourbon", 30, []string{"Bourbon Bar", "Whiskey Room", "Bourbon House", "Julep Lounge", "Tasting Room"}, "bourbon bar",
		[]string{"a wall of rare bourbon", "mint juleps", "old fashioneds", "bourbon flights"}, menuBar, hoursBar, venueStage, false},
	{"drink.bar.pub", 30, []string{"Pub", "Tavern", "Saloon", "Taproom", "Ale House"}, "neighbourhood bar",
		[]string{"cold draft beer", "live bluegrass on Fridays", "pool tables", "beer cheese"}, menuBar, hoursBar, venueStage, false},
	{"drink.brewery", 12, []string{"Brewing Co.", "Brewery", "Beer Works", "Aleworks"}, "craft brewery",
		[]string{"Kentucky Common ale", "bourbon-barrel stouts", "a dog-friendly patio"}, menuBrewery, hoursBar, venueStage, false},
	{"drink.distillery", 12, []string{"Distillery", "Distilling Co.", "Spirits", "Still House"}, "craft distillery",
		[]string{"small-batch bourbon", "rickhouse tours", "wheated bourbon", "barrel tastings"}, noMenu, hoursShop, venueFood, false},
	{"drink.winery", 8, []string{"Winery", "Vineyards", "Wine Cellars"}, "winery",
		[]string{"blackberry wine", "a tasting room with a view", "vineyard picnics"}, noMenu, hoursShop, venueFood, false},
	{"lodging.hotel", 30, []string{"Inn", "Hotel", "Motor Lodge", "Inn & Suites"}, "hotel",
		[]string{"a free country breakfast", "a quiet location", "an easy drive to the Bourbon Trail"}, noMenu, hoursAlways, notVenue, false},
	{"lodging.bnb", 12, []string{"Bed & Breakfast", "Guest House", "Manor"}, "bed and breakfast",
		[]string{"antebellum rooms", "a big farm breakfast", "rocking chairs on the porch"}, noMenu, hoursAlways, notVenue, false},
	{"lodging.cabin", 10, []string{"Cabins", "Cottages", "Lodge"}, "cabin rental",
		[]string{"hot tubs with mountain views", "quiet creekside cabins", "fire pits"}, noMenu, hoursAlways, notVenue, false},
	{"outdoors.campground", 8, []string{"Campground", "RV Park", "Family Campground"}, "campground",
		[]string{"shaded lakeside sites", "full hookups", "easy river access"}, noMenu, hoursDaylight, notVenue, false},
	{"shop.antiques", 30, []string{"Antiques", "Antique Mall", "Trading Post", "Collectibles"}, "antique shop",
		[]string{"primitives and quilts", "vintage bourbon decanters", "farmhouse furniture"}, noMenu, hoursShop, notVenue, false},
	{"shop.grocery", 45, []string{"Market", "Grocery", "Foods", "General Store", "Country Store"}, "grocery",
		[]string{"a real butcher counter", "local sorghum and honey", "country hams"}, noMenu, hoursShop, notVenue, true},
	{"shop.hardware", 20, []string{"Hardware", "Feed & Seed", "Farm Supply"}, "hardware and farm store",
		[]string{"friendly advice", "garden seed by the scoop", "everything for the farm"}, noMenu, hoursShop, notVenue, true},
	{"shop.books", 8, []string{"Books", "Bookshop", "Book Nook"}, "bookshop",
		[]string{"Kentucky authors", "used and rare books", "a reading nook"}, noMenu, hoursShop, venueArts, false},
	{"shop.gifts", 25, []string{"Gifts", "Mercantile", "Boutique", "Outfitters", "Quilt Shop"}, "gift shop",
		[]string{"Kentucky-made crafts", "handmade quilts", "local pottery"}, noMenu, hoursShop, notVenue, false},
	{"outdoors.park", 30, []string{"Park", "Nature Preserve", "Commons", "Greenway"}, "park",
		[]string{"shaded walking trails", "a splash pad", "picnic shelters", "a fishing pond"}, noMenu, hoursDaylight, venueGrounds, false},
	{"outdoors.trail", 10, []string{"Trailhead", "Falls", "Overlook", "Nature Trail"}, "trail",
		[]string{"a waterfall hike", "sandstone arches", "ridge-top views"}, noMenu, hoursDaylight, notVenue, false},
	{"outdoors.marina", 5, []string{"Marina", "Boat Dock", "Harbor"}, "marina",
		[]string{"pontoon rentals", "a floating restaurant", "houseboat slips"}, noMenu, hoursDaylight, notVenue, false},
	{"arts.museum", 12, []string{"Museum", "Heritage Center", "History Museum", "Historical Society"}, "museum",
		[]string{"local history exhibits", "Civil War artifacts", "a restored railroad depot"}, noMenu, hoursShop, venueArts, false},
	{"arts.gallery", 10, []string{"Gallery", "Art Center", "Pottery", "Craft Guild"}, "art gallery",
		[]string{"Appalachian crafts", "regional painters", "pottery classes"}, noMenu, hoursShop, venueArts, false},
	{"arts.theater", 8, []string{"Theater", "Playhouse", "Opera House"}, "theater",
		[]string{"community theater", "a restored 1920s stage", "summer musicals"}, noMenu, hoursOffice, venueArts, false},
	{"arts.music_venue", 8, []string{"Music Hall", "Opry", "Bluegrass Barn", "Listening Room"}, "music venue",
		[]string{"Saturday bluegrass jams", "touring Americana acts", "open-mic nights"}, noMenu, hoursBar, venueStage, false},
	{"attractions.horse_farm", 6, []string{"Farm", "Stables", "Thoroughbreds", "Horse Park"}, "horse farm",
		[]string{"Thoroughbred farm tours", "retired racehorses", "rolling bluegrass pastures"}, noMenu, hoursDaylight, venueGrounds, false},
	{"services.auto_repair", 40, []string{"Auto Repair", "Garage", "Tire & Auto", "Body Shop", "Automotive"}, "auto repair shop",
		[]string{"honest estimates", "same-day oil changes", "tires and alignments"}, noMenu, hoursOffice, notVenue, true},
	{"services.salon", 30, []string{"Barber Shop", "Salon", "Hair Studio"}, "salon",
		[]string{"walk-in haircuts", "classic hot-towel shaves"}, noMenu, hoursOffice, notVenue, true},
	{"services.veterinary", 12, []string{"Animal Hospital", "Veterinary Clinic", "Animal Clinic"}, "veterinary clinic",
		[]string{"large-animal care", "caring staff"}, noMenu, hoursOffice, notVenue, true},
	{"health.pharmacy", 30, []string{"Pharmacy", "Drug Store", "Apothecary"}, "pharmacy",
		[]string{"a soda fountain", "fast prescriptions", "free local delivery"}, noMenu, hoursShop, notVenue, true},
	{"health.clinic", 20, []string{"Family Medicine", "Urgent Care", "Clinic"}, "clinic",
		[]string{"same-day appointments", "walk-in care"}, noMenu, hoursOffice, notVenue, true},
	{"health.dentist", 15, []string{"Dental", "Family Dentistry", "Smiles"}, "dental practice",
		[]string{"gentle family dentistry", "evening appointments"}, noMenu, hoursOffice, notVenue, true},
}

// Name parts. A name is "<part> <core>", where part is a Kentucky word, a family name,
// a street or the town itself.
var namePrefixes = []string{
	"Bluegrass", "Kentucky", "Old Kentucky", "Commonwealth", "Derby", "Limestone", "Cumberland",
	"Appalachian", "Big Sandy", "Licking River", "Green River", "Red River", "Ohio River",
	"Rolling Fork", "Pennyrile", "Mammoth", "Pine Mountain", "Black Mountain", "Wilderness Road",
	"Iron Horse", "Hickory", "Sassafras", "Redbud", "Dogwood", "Hilltop", "Holler", "Creekside",
	"Riverbend", "Two Rivers", "Stillhouse", "Rickhouse", "Barrel House", "Copper Still",
	"Tobacco Barn", "Paddock", "Horseshoe", "Blue Moon", "Mint Julep", "Hot Brown", "Burgoo",
	"Possum Trot", "Muddy Fork", "Sweet Magnolia", "Honeysuckle", "Sorghum", "Covered Bridge",
	"Fiddle", "Banjo", "Dulcimer", "Moonshine", "Catalpa", "Tulip Poplar", "The Knobs",
	"Palisades", "Cumberland Gap", "Lake Cumberland", "Kentucky Lake", "Rough River", "Salt River",
	"Elkhorn", "Shaker", "Daniel Boone", "Coal Country", "Golden Pond", "Buffalo Trace",
	"Twin Knobs", "Cane Ridge", "Sugar Tree", "Poke Sallet", "Walnut Grove", "Bent Oak",
	"Red Barn", "Stone Fence", "Whippoorwill", "Bobwhite", "Cardinal Hill", "Tin Roof",
	"Front Porch", "Back Porch", "Lantern", "Corner", "Depot", "Old Mill", "Crossroads", "Courthouse",
}

var familyNames = []string{
	"Miller", "Clay", "Boone", "Harrod", "Combs", "Caudill", "Slone", "Sizemore", "Napier",
	"Hatfield", "Stamper", "Wells", "Collins", "Baker", "Tackett", "Sturgill", "Hensley",
	"Mattingly", "Beam", "Pepper", "Samuels", "Weller", "Dant", "Wathen", "Buckner", "Shelby",
	"Crittenden", "Ballard", "Graves", "Hardin", "Cassidy", "Todd", "Logan", "Grayson", "Ritchie",
	"Fugate", "Gabbard", "Noble", "Couch", "Begley", "Hoskins", "Mullins", "Osborne", "Ison",
	"Sexton", "Akers", "Blevins", "Spurlock", "Cundiff", "Wheeler", "Hale", "Pruitt", "Skaggs",
	"Thacker", "Yates", "Vanover", "Roark", "Kinder", "Abney", "Bingham", "Conley", "Dixon", "Elam",
	"Frazier", "Gilley", "Howard", "Jenkins", "Lykins", "Marcum", "Neace", "Perry", "Ratliff", "Stacy",
	"Turner", "Whitaker", "Adams", "Bowling", "Carroll", "Duncan", "Estep", "Fields", "Greer", "Hurt", "Mom", "Granny", "Papaw", "Mamaw",
	"Uncle Jim", "Aunt Bee", "Big Earl", "Miss Ruby", "Doc",
}

var streets = []string{
	"Main St", "Broadway", "Walnut St", "Maple Ave", "Depot St", "Court Square", "Mill St",
	"Water St", "High St", "Chestnut St", "Elm St", "Market St", "Church St", "College St",
	"Railroad St", "Bardstown Rd", "Lexington Rd", "Dixie Hwy", "Old Frankfort Pike", "Paris Pike",
	"Russell Cave Rd", "Tates Creek Rd", "Leestown Rd", "Harrodsburg Rd", "Versailles Rd",
	"Richmond Rd", "Shelbyville Rd", "Frankfort Ave", "Preston Hwy", "Winchester Rd",
	"Iron Works Pike", "Bethel Rd", "Louisville Rd", "Nashville Rd", "Scottsville Rd",
	"US-60", "US-31W", "US-25", "US-27", "US-119", "US-23", "KY-80", "KY-15", "KY-7",
	"Old State Rd", "Pike St", "Hospital Dr", "Industrial Pkwy", "Stanford Rd", "Cumberland Ave",
}

// neighbourhoods give the big cities' businesses local names: "Highlands Smokehouse".
var neighbourhoods = map[string][]string{
	"louisville-jefferson-county-metro-government-balance": {
		"Highlands", "NuLu", "Germantown", "Crescent Hill", "Butchertown", "Old Louisville",
		"Portland", "Clifton", "Fern Creek", "Okolona", "Valley Station", "Schnitzelburg",
		"Irish Hill", "Beechmont", "Iroquois", "Cherokee Triangle", "Smoketown", "Shawnee",
		"Russell", "Fairdale", "Pleasure Ridge", "Buechel", "Highview", "Bardstown Road",
		"Frankfort Avenue", "River Road", "Waterfront", "Churchill Downs", "Derby City", "Falls City",
	},
	"lexington-fayette-urban-county": {
		"Chevy Chase", "Hamburg", "Beaumont", "Masterson Station", "Hartland", "Distillery District",
		"Southland", "Palomar", "Andover", "Ashland Park", "Gardenside", "Kenwick", "Bell Court",
		"Mentelle", "Woodland", "Jefferson Street", "Gratz Park", "North Limestone", "Hollow Creek",
		"Keeneland", "Horse Capital", "Tates Creek", "Brighton", "Idle Hour", "Cardinal Valley",
	},
}

// streetNames are streets whose names read well on a sign: "Old Frankfort Pike Antiques".
var streetNames = []string{
	"Main Street", "Broadway", "Depot Street", "Court Square", "Mill Street", "Water Street",
	"Market Street", "Old Frankfort Pike", "Paris Pike", "Iron Works Pike", "Bardstown Road",
	"Russell Cave", "Tates Creek", "Leestown", "Frankfort Avenue", "Dixie Highway", "Old State Road",
	"Railroad Street", "Chestnut Street", "Cumberland Avenue",
}

// chainBrands are fictional regional chains: the same name at many locations.
var chainBrands = []struct{ name, category, domain string }{
	{"Bluegrass Burger Barn", "food.restaurant.american", "bluegrassburgerbarn"},
	{"Commonwealth Coffee", "food.cafe", "commonwealthcoffee"},
	{"Cardinal Grocers", "shop.grocery", "cardinalgrocers"},
	{"Thoroughbred Inn & Suites", "lodging.hotel", "thoroughbredinn"},
	{"Wildcat Drug", "health.pharmacy", "wildcatdrug"},
	{"Derby Hot Chicken", "food.restaurant.chicken", "derbyhotchicken"},
}

// sharedNames are independent businesses with common names; they repeat across towns
// without being a chain, which is what the read API's 3-or-more name rule is for.
var sharedNames = []struct{ name, category string }{
	{"Dairy Bar", "food.dessert"},
	{"Main Street Diner", "food.restaurant.american"},
	{"Family Pharmacy", "health.pharmacy"},
	{"Country Store", "shop.grocery"},
	{"Town & Country Antiques", "shop.antiques"},
	{"City Barber Shop", "services.salon"},
}

type dish struct {
	name, desc, section string
	lo, hi              int // price range in dollars
}

var menus = map[menuKind][]dish{
	menuBBQ: {
		{"Fried Pickles", "Hand-breaded dill chips with ranch", "Starters", 6, 9},
		{"Cup of Burgoo", "Kentucky stew of smoked meats and vegetables", "Starters", 5, 8},
		{"Pulled Pork Plate", "Hickory-smoked shoulder, two sides", "Plates", 12, 17},
		{"Brisket Plate", "Sliced 14-hour brisket, two sides", "Plates", 15, 22},
		{"Half Rack of Ribs", "Dry-rubbed spare ribs", "Plates", 16, 24},
		{"Mutton Plate", "Owensboro-style smoked mutton with black dip", "Plates", 14, 19},
		{"Smoked Chicken Quarter", "", "Plates", 10, 14},
		{"Burnt Ends", "Brisket points in sweet sauce", "Plates", 14, 20},
		{"Mac & Cheese", "", "Sides", 3, 5},
		{"Collard Greens", "", "Sides", 3, 5},
		{"Baked Beans", "With burnt ends", "Sides", 3, 5},
		{"Cornbread", "", "Sides", 2, 4},
		{"Banana Pudding", "", "Desserts", 4, 7},
		{"Sweet Tea", "", "Drinks", 2, 3},
	},
	menuSouthern: {
		{"Hot Brown", "Open-faced turkey and bacon under Mornay sauce", "Mains", 14, 19},
		{"Country Ham Biscuit", "", "Breakfast", 5, 8},
		{"Fried Chicken Dinner", "Three pieces, mashed potatoes and green beans", "Mains", 13, 18},
		{"Chicken & Dumplings", "", "Mains", 11, 15},
		{"Meatloaf", "With tomato glaze", "Mains", 12, 16},
		{"Shrimp & Grits", "", "Mains", 15, 21},
		{"Fried Green Tomatoes", "With pimento cheese", "Starters", 7, 10},
		{"Beer Cheese & Crackers", "", "Starters", 6, 9},
		{"Spoonbread", "", "Sides", 3, 5},
		{"Soup Beans & Cornbread", "", "Sides", 4, 7},
		{"Derby Pie", "Chocolate walnut pie with bourbon whipped cream", "Desserts", 5, 8},
		{"Chess Pie", "", "Desserts", 4, 7},
		{"Blackberry Cobbler", "", "Desserts", 5, 8},
		{"Sweet Tea", "", "Drinks", 2, 3},
	},
	menuAmerican: {
		{"Bluegrass Burger", "Half-pound patty, beer cheese, bacon", "Burgers", 11, 16},
		{"Bacon Cheeseburger", "", "Burgers", 10, 14},
		{"Patty Melt", "On griddled rye", "Burgers", 10, 14},
		{"Wings", "Ten wings, choice of sauce", "Starters", 10, 15},
		{"Onion Rings", "", "Starters", 5, 8},
		{"Pretzel & Beer Cheese", "", "Starters", 7, 11},
		{"Club Sandwich", "", "Sandwiches", 10, 14},
		{"Chicken Tenders", "", "Mains", 10, 14},
		{"Ribeye Steak", "12 oz, two sides", "Mains", 24, 34},
		{"Cobb Salad", "", "Salads", 10, 14},
		{"Hand-cut Fries", "", "Sides", 3, 5},
		{"Milkshake", "Vanilla, chocolate or bourbon caramel", "Desserts", 5, 8},
	},
	menuMexican: {
		{"Chips & Salsa", "", "Starters", 3, 5},
		{"Queso Dip", "", "Starters", 5, 8},
		{"Street Tacos", "Three tacos, onion and cilantro", "Tacos", 9, 13},
		{"Burrito Supreme", "", "Mains", 11, 15},
		{"Chicken Enchiladas", "Red or green sauce", "Mains", 11, 15},
		{"Steak Fajitas", "", "Mains", 15, 21},
		{"Quesadilla", "", "Mains", 9, 13},
		{"Pork Tamales", "", "Mains", 10, 14},
		{"Churros", "", "Desserts", 5, 7},
		{"Horchata", "", "Drinks", 3, 4},
	},
	menuItalian: {
		{"Garlic Knots", "", "Starters", 5, 8},
		{"Caesar Salad", "", "Salads", 8, 12},
		{"Margherita Pizza", "San Marzano tomato, fresh mozzarella, basil", "Pizza", 13, 18},
		{"Pepperoni Pizza", "", "Pizza", 13, 18},
		{"Bourbon BBQ Chicken Pizza", "", "Pizza", 15, 20},
		{"Spaghetti & Meatballs", "", "Pasta", 13, 18},
		{"Lasagna", "Beef and ricotta, baked to order", "Pasta", 15, 20},
		{"Chicken Parmesan", "", "Pasta", 16, 22},
		{"Tiramisu", "", "Desserts", 6, 9},
		{"Cannoli", "", "Desserts", 4, 7},
	},
	menuChicken: {
		{"Hot Chicken Sandwich", "Nashville heat, slaw and pickles", "Sandwiches", 9, 13},
		{"Chicken Tenders", "Four tenders, one side", "Mains", 9, 13},
		{"Three-piece Dinner", "Two sides and a biscuit", "Mains", 11, 15},
		{"Wings", "", "Mains", 10, 14},
		{"Mac & Cheese", "", "Sides", 3, 5},
		{"Coleslaw", "", "Sides", 2, 4},
		{"Buttermilk Biscuit", "With honey butter", "Sides", 2, 3},
		{"Sweet Tea", "", "Drinks", 2, 3},
	},
	menuSeafood: {
		{"Catfish Platter", "Two fillets, hushpuppies, slaw", "Mains", 14, 19},
		{"Fried Shrimp", "", "Mains", 14, 19},
		{"Crappie Dinner", "Kentucky Lake crappie, lightly fried", "Mains", 16, 22},
		{"Fish Sandwich", "", "Sandwiches", 10, 14},
		{"Crab Cakes", "", "Starters", 11, 16},
		{"Hushpuppies", "", "Sides", 3, 5},
		{"Coleslaw", "", "Sides", 2, 4},
		{"Key Lime Pie", "", "Desserts", 5, 7},
	},
	menuCafe: {
		{"Drip Coffee", "", "Coffee", 2, 3},
		{"Latte", "", "Coffee", 4, 6},
		{"Cappuccino", "", "Coffee", 4, 6},
		{"Bourbon Vanilla Latte", "Non-alcoholic, house bourbon-vanilla syrup", "Coffee", 5, 7},
		{"Cold Brew", "", "Coffee", 4, 6},
		{"Chai Latte", "", "Tea", 4, 6},
		{"Breakfast Biscuit", "Egg, cheddar and country ham", "Food", 6, 9},
		{"Avocado Toast", "", "Food", 8, 11},
		{"Blueberry Muffin", "", "Bakery", 3, 5},
		{"Cinnamon Roll", "", "Bakery", 4, 6},
		{"Quiche of the Day", "", "Food", 7, 10},
	},
	menuBakery: {
		{"Glazed Donut", "", "Bakery", 1, 3},
		{"Apple Fritter", "", "Bakery", 3, 5},
		{"Sourdough Loaf", "", "Bread", 7, 10},
		{"Chess Pie Slice", "", "Pies", 4, 6},
		{"Bourbon Balls", "Box of twelve", "Candy", 14, 22},
		{"Chocolate Chip Cookie", "", "Bakery", 2, 4},
		{"Soft-serve Cone", "", "Ice Cream", 2, 4},
		{"Banana Split", "", "Ice Cream", 6, 9},
		{"Blackberry Milkshake", "", "Ice Cream", 5, 7},
		{"Root Beer Float", "", "Ice Cream", 4, 6},
	},
	menuBar: {
		{"Old Fashioned", "Kentucky bourbon, bitters, orange", "Cocktails", 10, 15},
		{"Mint Julep", "", "Cocktails", 10, 14},
		{"Bourbon Flight", "Three half-pours from Kentucky distilleries", "Bourbon", 18, 35},
		{"Manhattan", "", "Cocktails", 11, 15},
		{"Kentucky Mule", "", "Cocktails", 9, 13},
		{"Draft Beer", "", "Beer", 5, 8},
		{"House Wine", "", "Wine", 7, 11},
		{"Beer Cheese Plate", "", "Food", 8, 12},
		{"Pimento Cheese Plate", "", "Food", 8, 12},
		{"Country Ham Sliders", "", "Food", 10, 14},
	},
	menuBrewery: {
		{"Kentucky Common", "Pre-Prohibition dark cream ale", "Beer", 6, 8},
		{"Hazy IPA", "", "Beer", 6, 8},
		{"Bourbon Barrel Stout", "Aged in Kentucky bourbon barrels", "Beer", 7, 10},
		{"Pilsner", "", "Beer", 5, 7},
		{"Beer Flight", "Four five-ounce pours", "Beer", 10, 14},
		{"Soft Pretzel", "With beer cheese", "Food", 8, 11},
		{"Loaded Nachos", "", "Food", 10, 14},
	},
}

var reviewComplaints = []string{
	"long waits on weekends", "limited parking", "prices that have crept up",
	"hours that change without notice", "slow service at peak times", "a small space that fills up fast",
}

var sourceNames = []string{"google", "yelp", "facebook", "foursquare", "osm", "website"}

var eventTitles = map[string][]string{
	"music":     {"Bluegrass Jam", "Friday Night Live Music", "Americana Songwriters Night", "Old-Time Fiddlers Contest", "Gospel Sing", "Blues & Bourbon Night"},
	"festival":  {"Burgoo Festival", "Sorghum Festival", "Apple Festival", "Heritage Days", "Bourbon & Bluegrass Festival", "Fall Fest", "Christmas on Main"},
	"market":    {"Farmers Market", "Holiday Craft Market", "Flea Market Saturday", "Makers Market"},
	"sports":    {"5K Fun Run", "Bass Fishing Tournament", "Cornhole Tournament", "Youth Soccer Jamboree", "Trail Half Marathon"},
	"arts":      {"Art Walk", "Quilt Show", "Community Theater: Opening Night", "Pottery Workshop", "Gallery Hop"},
	"food":      {"Bourbon Tasting", "BBQ Cook-off", "Chili Cook-off", "Farm-to-Table Dinner", "Fish Fry"},
	"community": {"Library Book Sale", "Town Hall Meeting", "Veterans Day Parade", "Blood Drive", "Trunk or Treat", "Volunteer Cleanup Day"},
}

var eventTypes = []string{"music", "festival", "market", "sports", "arts", "food", "community"}
